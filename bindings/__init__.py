"""The binding table: models, the Redis store and its history. Imports no Flask."""

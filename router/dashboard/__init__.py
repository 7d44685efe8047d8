"""The operator dashboard at `/`: server-rendered pages over the same data as the API.

`views` (the blueprint and its routes), `data` (what each page shows, read
through `gatekeeper.view`), `svg` (inline charts), `templates/` and `static/`.
"""

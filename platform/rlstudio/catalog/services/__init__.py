"""Writes of the catalog, one module per thing it changes:

- `datasets`: a dataset's upload and its deletion;
- `validation`: queuing and running a dataset's validation and conversion, its token statistics;
- `model_assets`: registering a model folder (and the demo model), deleting a model, and the hooks
  and refusals other apps register on that deletion;
- `files`: the files under the uploads root (their layout, limits, names, removal);
- `usage`: the runs that use a catalog object, as its deletion names them.

Who may change or share an object: `rlstudio.catalog.sharing`. New code imports from the owning module.
"""

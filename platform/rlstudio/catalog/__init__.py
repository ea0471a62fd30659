"""Catalog: datasets and model assets that runs train on."""

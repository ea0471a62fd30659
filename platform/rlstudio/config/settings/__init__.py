"""Django settings: `base` (shared), `local` (development), `test` (pytest), `production`."""

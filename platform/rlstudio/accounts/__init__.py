"""Accounts: login/logout, personal API tokens, the audit log."""

"""Who may do what: bearer-token mechanics shared by node and API tokens, API roles, and the audit log of changes."""

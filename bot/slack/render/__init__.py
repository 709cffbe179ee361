"""Block Kit rendering, pure (models in, dicts out): request and digest messages, modals, the edit
form."""

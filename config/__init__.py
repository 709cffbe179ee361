"""Configuration: the settings (the only code reading the environment) and Slack manifests."""

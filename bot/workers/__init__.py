"""Background loops beside the dispatcher: the deadline sweeper and the webhook worker."""

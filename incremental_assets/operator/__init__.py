"""The operator's wing: plan and apply, forget, skip and resolve, maintenance."""

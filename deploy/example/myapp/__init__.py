"""An example task module for the deploy files (replace it with your own)."""

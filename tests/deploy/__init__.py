"""Deployment checks: the Dockerfile, the Hugging Face Space config, the health routes."""

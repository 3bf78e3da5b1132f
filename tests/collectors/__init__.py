"""Local stand-ins for the devices the Telegraf collectors poll."""

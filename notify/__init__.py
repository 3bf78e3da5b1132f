"""Telling people: incidents to chat (Feishu, DingTalk, WeCom, Slack, Teams, any webhook) by
routes that are data, through a durable outbox that survives restarts of the daemon and of the
chat service. The stage after rca/: it reads incident records, never the detectors."""

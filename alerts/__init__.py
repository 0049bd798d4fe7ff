"""Alert rules, routing and delivery (Slack, e-mail) for budget, idle and health events."""

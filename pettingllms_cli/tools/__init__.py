"""Tools the environments offer to agents, and the one tool-call format they share."""

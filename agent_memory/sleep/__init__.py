"""Sleep: the jobs that keep a memory healthy while nobody is talking to it (decay, tiering, and more to come)."""

"""The chaos run: a live broker, consumer processes killed at random, and the proof that every
payment was applied exactly once (``sa-inbox chaos``)."""

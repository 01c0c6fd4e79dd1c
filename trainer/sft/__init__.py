"""Supervised stages: behaviour cloning (the cold start), SFT / CT samples and streaming, rejection-sampling fine-tuning."""

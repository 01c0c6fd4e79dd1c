"""Reinforcement learning: the PPO maths, one update, the streaming PPO trainer and its distributed ranks."""

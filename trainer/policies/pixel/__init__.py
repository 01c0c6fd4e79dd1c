"""The pixel policy kind: a small CNN over the screenshot, its text grounding and inputs."""

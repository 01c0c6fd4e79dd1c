"""The language policy kind: a Hugging Face causal LM writing UI-TARS text, its pointer, grounding, BC and publishing."""

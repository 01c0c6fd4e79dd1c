"""What every trainer shares: checkpoint format, metric names, publishing, pretrained checkpoints, augmentation."""

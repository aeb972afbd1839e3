"""Small pieces every side shares: logging, error mapping, paths, manifests."""

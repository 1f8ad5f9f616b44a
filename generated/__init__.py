"""Generated model code: generated/<target>/<model>/. Rebuild with `modelgen build --all`. Do not edit."""

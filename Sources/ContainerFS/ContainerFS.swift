// The FUSE adapter (in progress).

//! Ready-made tools (placeholder; being written).

//! The OpenAI-compatible endpoint (being written).

//! Recorded provider responses served over loopback HTTP to the real adapters. (Stub.)

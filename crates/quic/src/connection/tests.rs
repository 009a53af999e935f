//! Connection tests driving a client and a server endpoint against each other in memory.

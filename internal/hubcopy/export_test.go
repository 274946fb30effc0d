package hubcopy

// ChunkSize lets the benchmark compare chunk sizes.
var ChunkSize = &chunkSize

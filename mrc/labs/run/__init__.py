"""One lab through a model: the packet simulator, the live or kernel runtime, or the flow
model; the workload drivers and fault binding they share, and the result they assemble."""

"""What gpucheck remembers of past runs and what it reads from them: for now the comparison of two runs
(`gpucheck diff`)."""

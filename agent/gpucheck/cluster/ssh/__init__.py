"""The one SSH layer of `gpucheck cluster`: connecting (Fabric), running a command, copying a file, a command
left running in the background, and what a remote command gave (`result.Remote`)."""

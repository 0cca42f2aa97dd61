"""Reading and writing run directories: the contract between jouleprof's parts."""

"""Video data: PyAV decoding, clip sources (folders, CSV lists) and synthetic FakeVideo clips.

Nothing is imported here so that `import jouleprof.data` stays light; import the modules.
"""

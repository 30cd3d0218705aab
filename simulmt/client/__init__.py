"""A captioning client of `simulmt serve`: streams words over the websocket protocol,
resumes dropped connections, keeps the log of what came back and writes WebVTT/SRT captions
(`simulmt client`)."""

"""Recording a run (`--record`), reading it back, judging it again, comparing two
(`diff`) and rendering it (`report`)."""

package cli

// FailbackReport is what failback prints (-o json prints it as it is).
type FailbackReport struct {
	Link string `json:"link"`
	// DryRun is set when nothing was changed; CopyStranded when the
	// checkpoints were left where they were, so that the original
	// direction copies the stranded tail once resumed.
	DryRun       bool `json:"dry_run,omitempty"`
	CopyStranded bool `json:"copy_stranded,omitempty"`
	// Writer is the writer that signed the checkpoints moved.
	Writer     string              `json:"writer,omitempty"`
	Partitions []FailbackPartition `json:"partitions"`
	Groups     []FailbackGroup     `json:"groups"`
}

// FailbackPartition is one source partition: its stranded tail on the old
// source, where writes on the target began, and its checkpoint.
type FailbackPartition struct {
	Topic       string `json:"topic"`
	TargetTopic string `json:"target_topic,omitempty"`
	Partition   int32  `json:"partition"`
	// Committed is the next source offset committed on the target (-1:
	// nothing copied); SourceLogStart and SourceEnd the old source's log
	// start and end (high watermark) as read now.
	Committed      int64 `json:"committed_next_offset"`
	SourceLogStart int64 `json:"source_log_start_offset"`
	SourceEnd      int64 `json:"source_end_offset"`
	// StrandedFrom and StrandedTo are the stranded tail [from, to): source
	// offsets the old source holds that never reached the target.
	// StrandedOffsets is to - from (transaction markers and aborted
	// records take offsets too, so it bounds the records from above).
	StrandedFrom    int64 `json:"stranded_from"`
	StrandedTo      int64 `json:"stranded_to"`
	StrandedOffsets int64 `json:"stranded_offsets"`
	// TargetStart is the target offset where writes on the target began:
	// the copied end at the failover, where the reverse link starts; -1
	// when nothing was copied (the reverse link starts at the target
	// partition's start).
	TargetStart int64 `json:"target_start"`
	// Checkpoint is the checkpoint as set (absent for a dry run or
	// --copy-stranded); Note says anything unusual.
	Checkpoint *int64 `json:"checkpoint,omitempty"`
	Note       string `json:"note,omitempty"`
}

// FailbackGroup is a synced group's position on the target and, where
// that is within what was copied from the old source, its exact position
// there.
type FailbackGroup struct {
	Group      string                   `json:"group"`
	Partitions []FailbackGroupPartition `json:"partitions"`
	// Error is why the group's positions could not be read.
	Error string `json:"error,omitempty"`
}

// FailbackGroupPartition is one partition of a group.
type FailbackGroupPartition struct {
	Topic        string `json:"topic"`
	TargetTopic  string `json:"target_topic"`
	Partition    int32  `json:"partition"`
	TargetOffset int64  `json:"target_offset"`
	// SourceOffset is the group's exact position on the old source, when
	// its target position is below the copied end (Carry "exact"); else
	// Carry is "reverse_link": the position is past what was copied, and
	// the reverse link's group sync carries it.
	SourceOffset *int64 `json:"source_offset,omitempty"`
	Carry        string `json:"carry"`
}

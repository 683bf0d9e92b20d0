package checkpoint

import "time"

// foreignLogEvery is the most often a record with a foreign key is logged:
// anyone allowed to write the topic could otherwise flood the log.
const foreignLogEvery = 10 * time.Second

// sampledLog lets one log line through per interval and counts the ones it
// holds back. It is not safe for concurrent use: the Store's lock guards
// it.
type sampledLog struct {
	every      time.Duration    // foreignLogEvery when zero
	now        func() time.Time // time.Now when nil; tests move it
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (l *sampledLog) allow() (suppressed int, ok bool) {
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	every := l.every
	if every == 0 {
		every = foreignLogEvery
	}
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.suppressed++
		return 0, false
	}
	l.last = now
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}

package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns utime+stime of a process, all its threads included
// (fields 14 and 15 of /proc/PID/stat).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	// The command name (field 2) may contain spaces; fields after it start
	// behind the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of pid %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: short stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu of pid %d: bad utime/stime", pid)
	}
	return (ut + st) / clockTicks, nil
}

// peakRSS returns VmHWM of a process in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("rss of pid %d: no VmHWM", pid)
}

// totalCPU sums cpuSeconds over pids.
func totalCPU(pids []int) (float64, error) {
	var sum float64
	for _, pid := range pids {
		s, err := cpuSeconds(pid)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// totalPeakRSS sums peakRSS over pids.
func totalPeakRSS(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		r, err := peakRSS(pid)
		if err != nil {
			return 0, err
		}
		sum += r
	}
	return sum, nil
}

// Package kafkabroker runs a real Apache Kafka 4.x broker (single node, KRaft,
// combined broker+controller) and MirrorMaker 2 as local java processes, for
// tests and benchmarks. The jars come from loadtest/kafka/fetch.sh, which
// downloads them once through Maven into ${FERRY_CACHE:-~/.cache/ferry}.
//
// Everything listens on 127.0.0.1 only. Each java process runs in its own
// process group and gets SIGKILL if the Go process dies, so a crashed or
// timed-out test leaves no broker behind; still, always call Stop (or Kill).
// See docs/real-kafka.md.
package kafkabroker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// LibsEnv names the environment variable that, when set, points at a folder
// of Kafka jars and bypasses fetch.sh.
const LibsEnv = "FERRY_KAFKA_LIBS"

// kafkaDirRel is where pom.xml, fetch.sh and log4j2.properties live,
// relative to the repository root.
const kafkaDirRel = "loadtest/kafka"

// Libs returns the folder holding every jar needed to run the broker and
// MirrorMaker 2. It uses $FERRY_KAFKA_LIBS if set; otherwise it runs
// loadtest/kafka/fetch.sh, which downloads the jars on first use (needs mvn)
// and only prints the cached folder after that.
func Libs() (string, error) {
	if dir := os.Getenv(LibsEnv); dir != "" {
		if err := checkLibs(dir); err != nil {
			return "", fmt.Errorf("kafka libs from $%s: %w", LibsEnv, err)
		}
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("kafka libs: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, kafkaDirRel, "fetch.sh"))
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafka libs: fetch.sh: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if err := checkLibs(dir); err != nil {
		return "", fmt.Errorf("kafka libs from fetch.sh: %w", err)
	}
	return dir, nil
}

// checkLibs makes sure dir looks like a complete jar folder, so a wrong path
// fails here rather than as a ClassNotFoundException in a log file.
func checkLibs(dir string) error {
	for _, pattern := range []string{"kafka_2.13-*.jar", "connect-mirror-[0-9]*.jar"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		if len(m) == 0 {
			return fmt.Errorf("no %s in %q", pattern, dir)
		}
	}
	return nil
}

// log4jConfig returns the path of loadtest/kafka/log4j2.properties, or ""
// if the repository cannot be found (log4j2 then falls back to its default,
// which prints only errors).
func log4jConfig() string {
	root, err := repoRoot()
	if err != nil {
		return ""
	}
	return filepath.Join(root, kafkaDirRel, "log4j2.properties")
}

// repoRoot finds the Ferry repository: the closest directory holding both
// go.mod and loadtest/kafka/fetch.sh, walking up from the working directory
// (go test runs in the package directory) and then from this source file.
func repoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isFile(filepath.Join(dir, "go.mod")) && isFile(filepath.Join(dir, kafkaDirRel, "fetch.sh")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("repository root (go.mod with loadtest/kafka/fetch.sh) not found; set $" + LibsEnv)
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

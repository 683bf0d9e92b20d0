package kafkabroker

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferry-replicator/ferry/loadtest/procgroup"
)

// jvmFlags are the flags Kafka's own kafka-run-class.sh uses by default
// (KAFKA_JVM_PERFORMANCE_OPTS), so measurements resemble a packaged Kafka.
var jvmFlags = []string{
	"-server",
	"-XX:+UseG1GC",
	"-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent",
	"-XX:+ExitOnOutOfMemoryError",
	"-Djava.awt.headless=true",
}

// javaArgs builds the java command line for mainClass.
func javaArgs(libs, heap string, extra []string, mainClass string, args ...string) []string {
	a := []string{"-Xms" + heap, "-Xmx" + heap}
	a = append(a, jvmFlags...)
	if conf := log4jConfig(); conf != "" {
		a = append(a, "-Dlog4j2.configurationFile="+conf)
	}
	a = append(a, extra...)
	a = append(a, "-cp", filepath.Join(libs, "*"), mainClass)
	return append(a, args...)
}

// exitError describes how a process that should be running ended, with the
// end of its log, which is where the JVM says why.
func exitError(p *procgroup.Proc, logPath string) error {
	return fmt.Errorf("java exited (%v); end of %s:\n%s", p.Err(), logPath, procgroup.LogTail(logPath, 30))
}

// writeProps writes a Java properties file with keys sorted, values as is
// but for line breaks, written as the \n escape so that a multi-line value
// (inline PEM) stays one property. Mode 0600: it may hold a private key.
func writeProps(path, header string, props map[string]string) error {
	var b strings.Builder
	b.WriteString("# " + header + "\n")
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", k, strings.ReplaceAll(props[k], "\n", `\n`))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

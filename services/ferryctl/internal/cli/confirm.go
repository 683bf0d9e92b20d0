package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Confirmation, as Terraform asks before apply or destroy: the command
// shows what it will do, asks a question, and only the exact answer
// "yes" goes ahead; anything else cancels it, changing nothing. Scripts
// say --yes instead, as Terraform's -auto-approve: a pipe or no stdin is
// refused rather than read, so that `yes | ferryctl ...` or a CI job
// cannot confirm by accident.

// errUnconfirmed is a confirmation nobody can give: stdin is not a
// terminal, ended without an answer, or the output is JSON (for a
// program). It exits as a usage error: the command line lacks --yes.
var errUnconfirmed = errors.New("not confirmed")

// errDeclined is a confirmation answered with anything but "yes".
var errDeclined = errors.New("cancelled")

// confirmAnswer is the one answer that confirms.
const confirmAnswer = "yes"

// interactive reports whether a person can answer on r: a terminal (a
// character device; /dev/null is one too, and ends at once), or a reader
// a program hands to RunContext (a test, a wrapper relaying a person's
// answer). A pipe, a file or no stdin at all is a script's: nobody is
// there to answer.
func interactive(r io.Reader) bool {
	if r == nil {
		return false
	}
	f, ok := r.(*os.File)
	if !ok {
		return true
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ask writes question to prompt and reads one line of in: nil when it is
// "yes", errDeclined for any other answer, errUnconfirmed when in ends
// first. An interrupt (ctx) ends the wait: the read itself cannot be
// interrupted, so it is left to end with the process, which exits next.
func ask(ctx context.Context, in io.Reader, prompt io.Writer, question string) error {
	fmt.Fprintf(prompt, "%s\n  Only '%s' will be accepted to confirm.\n\n  Enter a value: ", question, confirmAnswer)
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(in).ReadString('\n')
		got <- answer{line, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-ctx.Done():
		fmt.Fprintln(prompt)
		return fmt.Errorf("%w: interrupted: %v", errDeclined, ctx.Err())
	}
	line := strings.TrimSpace(a.line)
	switch {
	case line == confirmAnswer:
		return nil
	case line == "" && a.err != nil:
		fmt.Fprintln(prompt)
		return fmt.Errorf("%w: stdin ended without an answer: pass --yes to confirm without asking", errUnconfirmed)
	}
	return fmt.Errorf("%w: answered %q, not %q", errDeclined, line, confirmAnswer)
}

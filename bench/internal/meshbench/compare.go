package meshbench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cronmesh/cronmesh/bench/internal/report"
)

// CPUPerExecution is what a sustained or burst report says of its CPU:
// the machine's per execution delivered in the window, and each process's,
// in the report's order. Milliseconds.
type CPUPerExecution struct {
	Executions int
	Machine    float64
	Processes  []string
	PerProcess map[string]float64
}

var machineLine = regexp.MustCompile(`CPU per execution, over the ([\d,]+) executions delivered in the window: \*\*machine ([\d.]+) ms\*\*`)

// ParseCPUPerExecution reads the CPU per execution from the Markdown of one
// run (perExecution's paragraph and table). A file holding more than one
// run, such as a capacity ramp's steps, is refused: which step to compare
// would be a guess.
func ParseCPUPerExecution(r io.Reader) (CPUPerExecution, error) {
	c := CPUPerExecution{PerProcess: map[string]float64{}}
	runs := 0
	inTable := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := machineLine.FindStringSubmatch(line); m != nil {
			runs++
			n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
			if err != nil {
				return c, fmt.Errorf("executions %q: %w", m[1], err)
			}
			if c.Machine, err = strconv.ParseFloat(m[2], 64); err != nil {
				return c, fmt.Errorf("machine %q: %w", m[2], err)
			}
			c.Executions = n
			continue
		}
		if strings.HasPrefix(line, "| process | CPU per execution |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 2 {
			inTable = false
			continue
		}
		name, value := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1])
		if strings.HasPrefix(name, "---") {
			continue
		}
		ms, err := strconv.ParseFloat(strings.TrimSuffix(value, " ms"), 64)
		if err != nil {
			return c, fmt.Errorf("process %s: CPU %q: %w", name, value, err)
		}
		if _, seen := c.PerProcess[name]; !seen {
			c.Processes = append(c.Processes, name)
		}
		c.PerProcess[name] = ms
	}
	switch {
	case sc.Err() != nil:
		return c, sc.Err()
	case runs == 0 || len(c.Processes) == 0:
		return c, errors.New("no CPU per execution in the report (a sustained or burst run's)")
	case runs > 1:
		return c, fmt.Errorf("the report holds %d runs; compare reports of one run each", runs)
	}
	return c, nil
}

// Comparison of two runs' CPU per execution, A before a change and B after
// it, for a change that touched Changed (process names as the reports
// spell them: "dispatcher", "postgresql", "trigger-1"...).
type Comparison struct {
	A, B    CPUPerExecution
	Changed []string
}

// Write prints the comparison as Markdown: a row per process, the machine,
// and the sums over the changed and the unchanged processes. The unchanged
// processes ran the same binaries in both runs, so their sum's move is the
// drift between the runs (the host, the load's timing); a change whose own
// processes moved by no more than that is not shown by this pair.
func (c Comparison) Write(w io.Writer) error {
	var unknown []string
	for _, p := range c.Changed {
		if _, ok := c.A.PerProcess[p]; !ok {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("no process %v in A's report (it has %v)", unknown, c.A.Processes)
	}
	ms := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	delta := func(a, b float64) []string {
		pct := "-"
		if a != 0 {
			pct = fmt.Sprintf("%+.1f %%", 100*(b-a)/a)
		}
		return []string{ms(a), ms(b), fmt.Sprintf("%+.3f", b-a), pct}
	}
	var rows [][]string
	var changedA, changedB, restA, restB float64
	for _, p := range c.A.Processes {
		b, ok := c.B.PerProcess[p]
		if !ok {
			return fmt.Errorf("process %s is in A's report, not in B's", p)
		}
		a := c.A.PerProcess[p]
		name := p
		if slices.Contains(c.Changed, p) {
			name = "**" + p + "** (changed)"
			changedA, changedB = changedA+a, changedB+b
		} else {
			restA, restB = restA+a, restB+b
		}
		rows = append(rows, append([]string{name}, delta(a, b)...))
	}
	rows = append(rows,
		append([]string{"**machine**"}, delta(c.A.Machine, c.B.Machine)...),
		append([]string{"the changed processes"}, delta(changedA, changedB)...),
		append([]string{"the unchanged processes (drift)"}, delta(restA, restB)...))
	fmt.Fprintf(w, "CPU per execution (ms), A over %s executions, B over %s:\n", report.Num(c.A.Executions), report.Num(c.B.Executions))
	if _, err := io.WriteString(w, report.Table([]string{"process", "A", "B", "B − A", "%"}, rows)); err != nil {
		return err
	}
	own, drift := changedB-changedA, restB-restA
	verdict := "moved by no more than the unchanged ones: this pair does not show the change"
	if math.Abs(own) > math.Abs(drift) {
		verdict = "moved by more than the unchanged ones"
	}
	if len(c.Changed) == 0 {
		verdict = "(none named: --changed)"
	}
	_, err := fmt.Fprintf(w, "\nThe changed processes: %+.3f ms; the unchanged: %+.3f ms. The changed processes %s.\n", own, drift, verdict)
	return err
}

// Package report is the benchmarks' one report writer: a Markdown document
// built up by a scenario (headings, paragraphs, tables), printed and
// appended to the run's report file, and the number formats every report
// uses, so that two reports put the same figure in the same words.
package report

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/machine"
	"github.com/cronmesh/cronmesh/bench/internal/procstat"
)

// Doc is a Markdown document. The zero value is empty and ready to use.
type Doc struct{ b strings.Builder }

// P appends a paragraph line (format as fmt.Sprintf), ending it with a
// newline; an empty P("") separates paragraphs. format reaches Fprintf
// unchanged, so go vet checks every call's verbs against its arguments.
func (d *Doc) P(format string, args ...any) {
	fmt.Fprintf(&d.b, format, args...)
	d.b.WriteByte('\n')
}

// H appends a heading of the level (2 for "##"), with blank lines around.
func (d *Doc) H(level int, title string) {
	fmt.Fprintf(&d.b, "\n%s %s\n\n", strings.Repeat("#", level), title)
}

// Code appends a fenced block, for a command or a tool's output.
func (d *Doc) Code(lang, text string) {
	fmt.Fprintf(&d.b, "\n```%s\n%s\n```\n\n", lang, strings.TrimRight(text, "\n"))
}

// Table appends a table: the first column left-aligned, the others right
// (they hold figures). A '|' inside a cell is escaped.
func (d *Doc) Table(head []string, rows [][]string) { d.b.WriteString(Table(head, rows)) }

// String is the document so far.
func (d *Doc) String() string { return d.b.String() }

// WriteTo writes the document to w.
func (d *Doc) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, d.b.String())
	return int64(n), err
}

// Emit prints the document to stdout and appends it to path (when not
// empty), creating path's directory.
func (d *Doc) Emit(path string) error {
	fmt.Print(d.b.String())
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(d.b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Table renders a Markdown table (see Doc.Table), with a blank line before
// and after.
func Table(head []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("\n| " + strings.Join(head, " | ") + " |\n|")
	for i := range head {
		if i == 0 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\n")
	return b.String()
}

// Machine appends the description of the machine.
func (d *Doc) Machine(m machine.Machine) { d.b.WriteString("\n" + m.Markdown() + "\n") }

// Usage appends the CPU table of a window: each group of order (tracked
// names, procstat.Postgres, procstat.RabbitMQ) in CPU seconds and cores,
// then what else ran (procstat.Other) and the machine's busy, iowait and
// steal; memory, when not nil, adds each group's peak RSS from that
// snapshot (taken at the end: VmHWM covers the process's whole life).
func (d *Doc) Usage(u procstat.Usage, order []string, memory *procstat.Snapshot) {
	if u.Err != nil {
		d.P("CPU not sampled: %v.", u.Err)
		return
	}
	head := []string{"process", "CPU", "cores"}
	if memory != nil {
		head = append(head, "peak RSS")
	}
	rows := [][]string{}
	row := func(name string, cpu time.Duration, mem string) {
		r := []string{name, fmt.Sprintf("%.1f s", cpu.Seconds()), fmt.Sprintf("%.2f", u.Of(cpu))}
		if memory != nil {
			r = append(r, mem)
		}
		rows = append(rows, r)
	}
	for _, g := range order {
		mem := ""
		if memory != nil {
			mem = MiB(memory.HWM(g))
			if g == procstat.Postgres || g == procstat.RabbitMQ {
				mem = MiB(memory.RSS(g)) + " (sum of RSS)"
			}
		}
		row(g, u.CPU[g], mem)
	}
	other := "other processes (machine busy − the above)"
	if len(u.TopOther) > 0 {
		other += ": " + strings.Join(u.TopOther, ", ")
	}
	row(other, u.CPU[procstat.Other], "")
	row("**machine busy** (all cores)", u.Busy, "")
	d.P("CPU over %s (per process from /proc/PID/stat, reaped children included; the machine from /proc/stat, %d cores): iowait %.2f cores, steal %.2f cores (the hypervisor running other guests: time this machine's processes could not run).",
		u.Wall.Round(time.Millisecond), u.Cores, u.Of(u.IOWait), u.Of(u.Steal))
	d.Table(head, rows)
}

// Judge is a target's verdict: "**met**" or "**missed**".
func Judge(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// JudgeIf is Judge when the run was large enough to judge the target,
// else "not judged".
func JudgeIf(can, ok bool) string {
	if !can {
		return "not judged"
	}
	return Judge(ok)
}

// Ms is a duration in milliseconds with a precision that suits it.
func Ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// Secs is a duration in seconds, two decimals.
func Secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// MiB is a size in MiB (GiB from 1 GiB on).
func MiB[T ~uint64 | ~int64 | ~float64](n T) string {
	if float64(n) >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Num is n with thousands separators.
func Num[T ~int | ~int64 | ~uint64](n T) string {
	if n < 0 {
		return "-" + Num(-n)
	}
	s := fmt.Sprint(n)
	var parts []string
	for len(s) > 3 {
		parts = append(parts, s[len(s)-3:])
		s = s[:len(s)-3]
	}
	parts = append(parts, s)
	slices.Reverse(parts)
	return strings.Join(parts, ",")
}

// Rate is a per-second figure rounded to a whole number, with separators.
func Rate(perSecond float64) string { return Num(int64(perSecond + 0.5)) }

// Quantile is the q-quantile (0..1) of sorted by the nearest rank (the
// smallest value with at least q of the values at or below it); 0 when
// sorted is empty.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ShellQuote renders a command line that a shell reads back as args.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

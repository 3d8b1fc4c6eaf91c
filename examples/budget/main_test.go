package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`server received (\d+) requests in all \(without a budget: 150\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output lacks the server's total:\n%s", out.String())
	}
	if total, _ := strconv.Atoi(m[1]); total < 60 || total > 65 {
		t.Errorf("server received %d requests, want 60 to 65 (50 first attempts, 10 to 15 retries)\n%s", total, out.String())
	}
	if !strings.Contains(out.String(), "budget snapshot: requests=50 ") {
		t.Errorf("output lacks the budget snapshot with 50 requests:\n%s", out.String())
	}
}

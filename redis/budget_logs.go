package retryfuseredis

import (
	"context"
	"fmt"
	"log/slog"
)

// slogLogger passes go-redis's log lines to a slog.Logger, at level Warn:
// see BudgetOptions.RedisLogger.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Printf(ctx context.Context, format string, v ...any) {
	if s.l.Enabled(ctx, slog.LevelWarn) {
		s.l.WarnContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
	}
}

"""perfci server: results service, regression detection, alerts and bisection orchestration."""

"""What timings say: low quantiles, intervals by objective, whole requests, step costs."""

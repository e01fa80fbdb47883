"""Where each client's memory is (residency.py), which reported moves may teach a rate
(credit.py), and the host memory staging may take (staging_budget.py)."""

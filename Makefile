# One command for the demo, one for the tests. Both install what they need first (root: apt-get).
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

# Test workers (pytest-xdist): the tests mostly wait on processes, hosts, apt, Ansible and Slurm, so more workers
# than cores still overlap. The lab tests are one group on one worker (its own lab instance), started first;
# the other workers take the rest a file at a time, the files that mostly wait spread among the others
# (tests/conftest.py: group, longest_first, hand_out_order; docs/testing.md).
JOBS   ?= 3
XDIST   = -n $(JOBS) --dist loadgroup --no-loadscope-reorder
# Python keeps its bytecode during the tests, even where the environment sets PYTHONDONTWRITEBYTECODE (CI's does):
# every worker collects every test module and the tests start many Python processes, each of which would compile
# its modules again (measured: collecting the suite, 5.1 CPU-s a process without bytecode, 1.7 s with it).
PYTEST  = PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(XDIST)
# What `make check` leaves out: the tests marked (or given, by the fixture they use) lab, sshd, slurm or kubernetes.
DAEMONS = lab or sshd or slurm or kubernetes

.PHONY: demo test check lint deps setup clean

demo: setup            ## bring up the lab, provision it with site.yml, validate it, print the report
	$(PY) -m lab demo $(ARGS)

test: setup            ## the whole suite, lab integration tests included (needs root)
	$(PYTEST) $(ARGS)

check: lint            ## the loop to run after each change: lint, then every test that needs no lab, sshd, Slurm or Kubernetes
	GPUCHECK_TESTS_NO_DAEMONS=1 $(PYTEST) -m "not ($(DAEMONS))" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check agent tests lab bench .ci

setup: deps $(STAMP)

deps:                  ## Debian packages for the lab, the fake NVML build and the tests
	@missing=$$(for p in $$(cat lab/apt-packages.txt tests/apt-packages.txt | grep -v '^#'); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[cluster,test]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info

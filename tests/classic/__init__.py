"""Tests of minippo.classic (a package, so module names like test_rollout do not collide with tests/rlhf)."""

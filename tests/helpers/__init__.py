"""What tests share: models they build, fake stages, servers they start, and the repository's own paths.
Test files import these from here, never from one another."""

"""Browser games written for Flywheel (the ``games`` suite): one package per game, each
registering a ``registry.Game`` by name. Importing this package registers them all."""

from producers.games import mines, snake, twenty48  # noqa: F401 - each registers its game
from producers.games.registry import GAMES, Game, get_game, normalised_score  # noqa: F401

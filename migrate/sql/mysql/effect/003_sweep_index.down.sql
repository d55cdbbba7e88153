DROP INDEX idem_effects_done ON idem_effects;

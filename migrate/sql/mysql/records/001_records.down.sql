DROP TABLE IF EXISTS `{{table}}_tokens`;
DROP TABLE IF EXISTS `{{table}}`;

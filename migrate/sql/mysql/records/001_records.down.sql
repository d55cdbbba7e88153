/*M! DROP SEQUENCE IF EXISTS `{{table}}_token_seq` */;
DROP TABLE IF EXISTS `{{table}}_tokens`;
DROP TABLE IF EXISTS `{{table}}`;

/*M! DROP PROCEDURE IF EXISTS `{{table}}_claim_group` */;
